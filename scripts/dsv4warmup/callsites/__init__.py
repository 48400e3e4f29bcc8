"""Call-site drivers: the exact kernel keys the real vLLM call sites and the warmups produce."""
