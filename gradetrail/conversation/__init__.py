"""Provider-neutral conversations: messages, tool definitions, transcripts."""
