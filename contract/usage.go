package contract

// Usage is what a provider reports one call consumed, in tokens.
type Usage struct {
	// Input is every input (prompt) token, cached ones included — OpenAI's
	// usage.prompt_tokens (or input_tokens). For Anthropic, whose
	// input_tokens excludes cache reads, add cache_read_input_tokens.
	Input int64
	// CachedInput is the part of Input served from the provider's prompt
	// cache and billed at the cached price (OpenAI's
	// prompt_tokens_details.cached_tokens, Anthropic's
	// cache_read_input_tokens).
	CachedInput int64
	// Output is every output (completion) token, reasoning included.
	Output int64
}
