"""The Secrets (and keys) a model's pods cannot start without, by the field naming each."""

from __future__ import annotations

from llm_operator.api.v1alpha1 import LLMModel


def required_secrets(model: LLMModel) -> list[tuple[str, str, str]]:
    """(Secret name, key, field path) the model's pods cannot start without."""
    spec, out = model.spec, []
    if spec.is_remote and spec.remote_api:
        out.append((spec.remote_api.api_key_secret, "apiKey", "spec.remoteApi.apiKeySecret"))
    source = spec.model_source
    if not spec.is_remote and source is not None:
        if source.hugging_face_token_secret:
            out.append((source.hugging_face_token_secret, "token",
                        "spec.modelSource.huggingFaceTokenSecret"))
        if source.s3_credentials_secret:
            out.append((source.s3_credentials_secret, "AWS_ACCESS_KEY_ID",
                        "spec.modelSource.s3CredentialsSecret"))
    for i, adapter in enumerate(spec.lora_adapters or ()):
        where = f"spec.loraAdapters[{i}].source"
        if adapter.source.hugging_face_token_secret:
            out.append((adapter.source.hugging_face_token_secret, "token",
                        f"{where}.huggingFaceTokenSecret"))
        if adapter.source.s3_credentials_secret:
            out.append((adapter.source.s3_credentials_secret, "AWS_ACCESS_KEY_ID",
                        f"{where}.s3CredentialsSecret"))
    return out
