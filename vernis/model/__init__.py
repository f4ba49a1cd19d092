"""The model: the chat-model seam, its OpenAI-compatible adapter, the prompt, and the scripted model."""
