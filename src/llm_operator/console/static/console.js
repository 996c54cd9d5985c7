// The console's scripts: live charts (uPlot) on a model's page, and the playground's chat.
// Everything it fetches is this gateway's own: /ui/api/series, /ui/api/guards and
// /v1/chat/completions.
"use strict";

const TEN_MINUTES = 600;

function colours() {
  const css = getComputedStyle(document.documentElement);
  const v = name => css.getPropertyValue(name).trim();
  return {fg: v("--muted"), grid: v("--line"),
          lines: [v("--accent"), v("--bad"), v("--warn"), v("--ok")]};
}

function axes(c) {
  const axis = {stroke: c.fg, grid: {stroke: c.grid, width: 1}, ticks: {stroke: c.grid}};
  const clock = {...axis, values: (u, ticks) => ticks.map(t => new Date(t * 1000).toLocaleTimeString())};
  return [clock, {...axis, size: 64}];  // room for "10,000"
}

// the last ten minutes, however few points there are yet
const LAST_TEN_MINUTES = {x: {time: true, range: (u, lo, hi) => [
  (hi || Date.now() / 1000) - TEN_MINUTES, hi || Date.now() / 1000]}};

function guardChart(el) {
  let plot = null, names = "", body = {at: [], lines: {}};
  function draw() {
    const lines = Object.keys(body.lines);
    const data = [body.at, ...lines.map(n => body.lines[n])];
    if (plot && names === lines.join("\n")) { plot.setData(data); return; }
    if (plot) plot.destroy();
    const c = colours();
    names = lines.join("\n");
    plot = new uPlot({
      width: Math.max(el.clientWidth, 260), height: 200, axes: axes(c), scales: LAST_TEN_MINUTES,
      series: [{}, ...lines.map((n, i) => ({label: n, stroke: c.lines[i % c.lines.length], width: 2}))],
    }, data, el);
  }
  async function refresh() {
    try {
      const res = await fetch("/ui/api/guards");
      if (res.ok) { body = await res.json(); draw(); }
    } catch (e) { /* the next refresh tries again */ }
  }
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => { names = ""; draw(); });
  refresh();
  setInterval(refresh, 3000);
}

function chartsOf(box) {
  const route = box.dataset.route;
  const latest = document.querySelector("[data-latest]");
  let charts = [], points = [];
  function build() {
    for (const c of charts) c.plot.destroy();
    const c = colours();
    charts = [];
    for (const el of box.querySelectorAll(".chart")) {
      const names = el.dataset.series.split(",");
      const opts = {
        width: Math.max(el.clientWidth, 260), height: 160,
        series: [{}, ...names.map((n, i) => ({label: n, stroke: c.lines[i % 2], width: 2}))],
        axes: axes(c), scales: LAST_TEN_MINUTES,
        legend: {show: names.length > 1},
      };
      charts.push({names, plot: new uPlot(opts, data(names), el)});
    }
  }
  function data(names) {
    return [points.map(p => p.at), ...names.map(n => points.map(p => p[n]))];
  }
  async function refresh() {
    try {
      const res = await fetch("/ui/api/series?route=" + encodeURIComponent(route));
      if (!res.ok) return;
      points = (await res.json())[route] || [];
      for (const c of charts) c.plot.setData(data(c.names));
      const last = points[points.length - 1];
      if (last && latest) {
        const ms = v => (v === null ? "-" : v + " ms");
        const bands = Object.entries(last.queue || {}).map(([band, n]) => `${band} ${n}`).join(", ");
        const busy = last.busy === null ? "-" : last.slots ? `${last.busy} of ${last.slots}` : `${last.busy}`;
        const cache = last.cacheHitPercent === null ? "-" : `${last.cacheHitPercent}%`;
        latest.textContent = `Now: ${last.requestsPerSecond} requests/s, p50 ${ms(last.p50Ms)}, ` +
          `p99 ${ms(last.p99Ms)}, first token ${ms(last.ttftP50Ms)}, ${last.tokensPerSecond} tokens/s, ` +
          `waiting: ${bands || "none"}, slots busy ${busy}, prompt from the prefix cache ${cache}`;
      }
    } catch (e) { /* the next refresh tries again */ }
  }
  build();
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", build);
  refresh();
  setInterval(refresh, 3000);
}

function playground(form) {
  const list = document.getElementById("messages");
  const figures = document.getElementById("figures");
  const send = document.getElementById("send");
  const model = document.getElementById("model");
  const history = [];
  model.addEventListener("change", () => {
    window.location.search = "?model=" + encodeURIComponent(model.value);
  });
  function say(role, text) {
    const item = document.createElement("li");
    item.className = "message " + role;
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = role === "user" ? "You" : model.value;
    const body = document.createElement("p");
    body.textContent = text;
    item.append(who, body);
    list.append(item);
    return body;
  }
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const prompt = document.getElementById("prompt");
    const text = prompt.value.trim();
    if (!text) return;
    prompt.value = "";
    history.push({role: "user", content: text});
    say("user", text);
    const out = say("assistant", "");
    out.setAttribute("aria-busy", "true");
    send.disabled = true;
    figures.textContent = "Waiting for the first token…";
    const headers = {"Content-Type": "application/json"};
    const key = document.getElementById("key").value;
    if (key) headers["Authorization"] = "Bearer " + key;
    const began = performance.now();
    let first = null, tokens = 0, chunks = 0, answer = "";
    try {
      const res = await fetch("/v1/chat/completions", {method: "POST", headers, body: JSON.stringify({
        model: model.value, messages: history, stream: true, stream_options: {include_usage: true},
        max_tokens: Number(document.getElementById("max-tokens").value) || 256,
        temperature: Number(document.getElementById("temperature").value)})});
      if (!res.ok) {
        const body = await res.json().catch(() => ({}));
        throw new Error((body.error && body.error.message) || ("HTTP " + res.status));
      }
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buffered = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buffered += decoder.decode(value, {stream: true});
        let cut;
        while ((cut = buffered.indexOf("\n")) >= 0) {
          const line = buffered.slice(0, cut).trim();
          buffered = buffered.slice(cut + 1);
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") continue;
          const chunk = JSON.parse(data);
          if (chunk.usage && chunk.usage.completion_tokens) tokens = chunk.usage.completion_tokens;
          const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
          if (delta && delta.content) {
            if (first === null) first = performance.now();
            chunks += 1;
            answer += delta.content;
            out.textContent = answer;
          }
        }
      }
      history.push({role: "assistant", content: answer});
      const seconds = (performance.now() - (first ?? began)) / 1000;
      const count = tokens || chunks;
      figures.textContent = `First token ${first === null ? "-" : Math.round(first - began) + " ms"}, ` +
        `${count} tokens, ${seconds > 0 ? (count / seconds).toFixed(1) : "-"} tokens/s`;
    } catch (e) {
      out.textContent = "Refused: " + e.message;
      out.parentElement.classList.add("error");
      history.pop();
      figures.textContent = "";
    } finally {
      out.removeAttribute("aria-busy");
      send.disabled = false;
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  for (const box of document.querySelectorAll(".charts[data-route]")) chartsOf(box);
  const guards = document.getElementById("guard-chart");
  if (guards) guardChart(guards);
  const form = document.getElementById("chat");
  if (form) playground(form);
});
