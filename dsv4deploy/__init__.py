"""dsv4deploy: gated, declarative rollouts of DeepSeek-V4-Flash on SGLang."""
