"""A Hugging Face Llama (transformers' LlamaForCausalLM, built from a config with random
weights: nothing is downloaded) trained for 3 steps with AdamW the way an HF user writes it —
no record_function ranges — recording C++ and Python frames (stacks="all") or Python frames only,
for memlens' readable stacks (allocator and interpreter frames folded, model code named).

Config: vocab 8000, hidden 512, 8 heads (4 key/value heads), 4 layers, MLP 1376, context 512;
batch 4 × 512 tokens. Run: python3 hf_llama.py OUT_DIR all|python
→ OUT_DIR/hf_llama[_cpp].pickle (+ .memory_stats.json).
"""
import json
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

out, stacks = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
config = LlamaConfig(vocab_size=8000, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                     num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512)
torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks=stacks)
model = LlamaForCausalLM(config).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(3):
    ids = torch.randint(0, config.vocab_size, (4, 512), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
name = "hf_llama_cpp" if stacks == "all" else "hf_llama"
torch.cuda.memory._dump_snapshot(f"{out}/{name}.pickle")
with open(f"{out}/{name}.memory_stats.json", "w") as f:
    json.dump(torch.cuda.memory_stats(), f, indent=1, sort_keys=True)
print(name, sum(p.numel() for p in model.parameters()), "parameters")
