"""What every console answer carries, which form posts it takes, and when a request is TLS."""

from __future__ import annotations

from aiohttp import web

# nothing from elsewhere: scripts, styles and data from this origin only
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "style-src 'self'; script-src 'self'; connect-src 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    # same-origin: the console's own form posts carry their Origin, never "null"
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def same_origin(request: web.Request) -> bool:
    """A form posted from this console's own pages, as the browser says.

    Browsers say where a request comes from in Sec-Fetch-Site; older ones only in Origin
    (the console's pages send theirs: Referrer-Policy same-origin; "null" comes from a
    sandboxed or no-referrer page elsewhere). A client that says neither (curl, a script)
    sends its credential itself: no page of another site can make it.
    """
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    if origin == "null":
        return False
    scheme = request.headers.get("X-Forwarded-Proto") or request.scheme
    return origin in (f"{scheme}://{request.host}", f"{request.scheme}://{request.host}")


def secure_request(request: web.Request) -> bool:
    """The browser came over TLS, to this process or to a proxy: its cookies are Secure."""
    return request.secure or request.headers.get("X-Forwarded-Proto") == "https"
