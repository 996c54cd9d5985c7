"""LLMModel API: types, validation rules, discovery labels and the generated CRD."""
