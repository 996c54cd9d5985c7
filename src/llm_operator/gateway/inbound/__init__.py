"""What clients send in other APIs than OpenAI's, translated to the gateway's OpenAI shape."""
