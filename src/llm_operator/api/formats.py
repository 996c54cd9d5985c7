"""Name formats of the LLMModel API: Kubernetes names, label keys and values, tool names."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

# Name formats. A model's name becomes a Service name and a label value, so it must be a
# DNS-1035 label (<= 63). Secret names are DNS-1123 subdomains. Tool names follow the MCP
# tool-name rules (1-128 of A-Z a-z 0-9 _ - .).
DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
MCP_TOOL_NAME = r"^[A-Za-z0-9_.-]{1,128}$"
HTTP_URL = r"^https?://[^\s/$.?#][^\s]*$"
PYPI_NAME = r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$"  # PEP 508 distribution name
S3_BUCKET = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
NO_WHITESPACE = r"^\S+$"
# Kubernetes label keys (optional DNS-subdomain prefix, name of 63) and label values;
# [.] rather than \. so that the pattern can sit in a CEL string literal as it is.
LABEL_KEY = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
             r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
# Keys the operator sets on pods itself: not for podLabels / podAnnotations.
RESERVED_POD_KEY_PREFIXES = ("ai.example.io/", "app.kubernetes.io/")

SecretName = Annotated[
    str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN,
               description="Name of a Secret in the model's namespace.")
]
