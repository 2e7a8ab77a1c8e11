"""The forward passes of the PyTorch references: Hugging Face
LlamaForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM
and GPT2LMHeadModel in plain torch (no transformers), reading the weights as
common.read_model returns them. Qwen3 is Llama with an RMSNorm of each
query and key head before RoPE and heads head_dim wide; Mixtral is Llama
with modeling_mixtral's sparse MLP block in every layer; Qwen3-MoE is Qwen3
with modeling_qwen3_moe's sparse block in the layers its config names.

Llama follows transformers' modeling_llama: RMSNorm (x · rsqrt(mean x² +
eps) · w), rotate_half RoPE with LlamaRotaryEmbedding's inv_freq and the
llama3 rescaling, grouped-query attention by repeat_kv, causal softmax
attention, the SiLU-gated MLP, the head tied to the embedding when
tie_word_embeddings. GPT-2 follows modeling_gpt2: token plus learned
position embeddings, pre-LN blocks (LayerNorm with layer_norm_epsilon),
Conv1D weights stored (in, out) and applied as x @ W + b, causal softmax
attention, the gelu_new (tanh) MLP, the final LayerNorm and the head tied
to wte.
"""

import math


def inv_freq(torch, config, head_dim):
    base = config.get("rope_theta", 10000.0)
    freqs = 1.0 / base ** (
        torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return freqs
    if kind != "llama3":
        raise ValueError(f"rope_scaling type {kind!r} is not implemented")
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / freqs
    scaled = torch.where(wavelen > old / low, freqs / factor, freqs)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return torch.where(medium, smoothed, scaled)


def rotate_half(torch, x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rms_norm(torch, x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def sparse_moe(torch, w, p, h, top_k, experts, renormalize, names):
    """A sparse MoE block (modeling_mixtral's, modeling_qwen3_moe's): a
    softmax over the router's logits (weight `p`gate.weight), the top_k
    experts (renormalized when `renormalize`), each chosen expert's
    SiLU-gated MLP (down(silu(gate x) * up x), weights `p`experts.{e}.NAME
    for names (gate, up, down)) weighted and summed."""
    gate, up, down = names
    flat = h.reshape(-1, h.shape[-1])
    probs = (flat @ w[p + "gate.weight"].T).softmax(-1)
    top, chosen = probs.topk(top_k, dim=-1)
    if renormalize:
        top = top / top.sum(-1, keepdim=True)
    out = torch.zeros_like(flat)
    for e in range(experts):
        rows, slot = (chosen == e).nonzero(as_tuple=True)
        if rows.numel() == 0:
            continue
        x = flat[rows]
        q = f"{p}experts.{e}."
        y = (torch.nn.functional.silu(x @ w[q + gate].T)
             * (x @ w[q + up].T)) @ w[q + down].T
        out.index_add_(0, rows, y * top[rows, slot].unsqueeze(-1))
    return out.view_as(h)


def mlp(torch, config, w, p, layer, h):
    """The layer's MLP: Llama's dense SwiGLU, Mixtral's sparse block
    (every layer), or Qwen3-MoE's (the layers decoder_sparse_step and
    mlp_only_layers give it)."""
    kind = config.get("model_type")
    if kind == "mixtral":
        return sparse_moe(torch, w, p + "block_sparse_moe.", h,
                          config["num_experts_per_tok"],
                          config["num_local_experts"], True,
                          ("w1.weight", "w3.weight", "w2.weight"))
    if (kind == "qwen3_moe" and config.get("num_experts", 0) > 0
            and layer not in config.get("mlp_only_layers", [])
            and (layer + 1) % config.get("decoder_sparse_step", 1) == 0):
        return sparse_moe(torch, w, p + "mlp.", h,
                          config["num_experts_per_tok"],
                          config["num_experts"],
                          config.get("norm_topk_prob", False),
                          ("gate_proj.weight", "up_proj.weight",
                           "down_proj.weight"))
    gate = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T)
    up = h @ w[p + "mlp.up_proj.weight"].T
    return (gate * up) @ w[p + "mlp.down_proj.weight"].T


def llama_logits(torch, config, w, inputs):
    """The next-token logits (B, T, V) of token ids `inputs` (B, T)."""
    c = config["hidden_size"]
    n_head = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads", n_head)
    d = config.get("head_dim") or c // n_head
    eps = config.get("rms_norm_eps", 1e-6)
    qk_norm = config.get("model_type") in ("qwen3", "qwen3_moe")
    b, t = inputs.shape
    angles = torch.outer(torch.arange(t, dtype=torch.float64),
                         inv_freq(torch, config, d))
    emb = torch.cat((angles, angles), dim=-1).to(w["model.norm.weight"])
    cos, sin = emb.cos(), emb.sin()
    mask = torch.tril(torch.ones(t, t, device=inputs.device)).bool()
    x = w["model.embed_tokens.weight"][inputs]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(torch, x, w[p + "input_layernorm.weight"], eps)

        def heads(name, n, h=h, p=p):
            return (h @ w[p + name].T).view(b, t, n, d).transpose(1, 2)

        q = heads("self_attn.q_proj.weight", n_head)
        k = heads("self_attn.k_proj.weight", n_kv)
        v = heads("self_attn.v_proj.weight", n_kv)
        if qk_norm:  # Qwen3: RMSNorm of each head before RoPE
            q = rms_norm(torch, q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(torch, k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rotate_half(torch, q) * sin
        k = k * cos + rotate_half(torch, k) * sin
        k = k.repeat_interleave(n_head // n_kv, dim=1)  # repeat_kv
        v = v.repeat_interleave(n_head // n_kv, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        scores = scores.masked_fill(~mask, float("-inf"))
        a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, n_head * d)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(torch, x, w[p + "post_attention_layernorm.weight"], eps)
        x = x + mlp(torch, config, w, p, layer, h)
    x = rms_norm(torch, x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"]
    if not config.get("tie_word_embeddings", False):
        head = w["lm_head.weight"]
    return x @ head.T


def layer_norm(torch, x, w, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


def gelu_new(torch, x):
    return 0.5 * x * (1.0 + torch.tanh(
        math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gpt2_logits(torch, config, w, inputs):
    """The next-token logits (B, T, V) of token ids `inputs` (B, T)."""
    c, n_head = config["n_embd"], config["n_head"]
    d = c // n_head
    eps = config.get("layer_norm_epsilon", 1e-5)
    b, t = inputs.shape
    if t > config["n_positions"]:
        raise ValueError(f"{t} tokens exceed n_positions "
                         f"{config['n_positions']}")
    mask = torch.tril(torch.ones(t, t, device=inputs.device)).bool()
    x = w["wte.weight"][inputs] + w["wpe.weight"][:t]
    for layer in range(config["n_layer"]):
        p = f"h.{layer}."

        def conv1d(name, h, p=p):  # transformers' Conv1D: (in, out) weight
            return h @ w[p + name + ".weight"] + w[p + name + ".bias"]

        h = layer_norm(torch, x, w[p + "ln_1.weight"], w[p + "ln_1.bias"],
                       eps)
        q, k, v = conv1d("attn.c_attn", h).split(c, dim=-1)
        q, k, v = (y.view(b, t, n_head, d).transpose(1, 2) for y in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        scores = scores.masked_fill(~mask, float("-inf"))
        a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + conv1d("attn.c_proj", a)
        h = layer_norm(torch, x, w[p + "ln_2.weight"], w[p + "ln_2.bias"],
                       eps)
        x = x + conv1d("mlp.c_proj", gelu_new(torch, conv1d("mlp.c_fc", h)))
    x = layer_norm(torch, x, w["ln_f.weight"], w["ln_f.bias"], eps)
    return x @ w.get("lm_head.weight", w["wte.weight"]).T


def gpt2_weights(tensors):
    """GPT2LMHeadModel's names ("transformer.h.0...") or GPT2Model's
    ("h.0..."), as GPT2Model's; the attention mask buffers left out."""
    out = {}
    for name, t in tensors.items():
        bare = name[len("transformer."):] if name.startswith(
            "transformer.") else name
        if bare.endswith(".attn.bias") or bare.endswith(".attn.masked_bias"):
            continue
        out[bare] = t
    return out


class Forward:
    """The logits (B, T, V) of token ids (B, T) on `device`, by config.json's
    model_type ("llama", "qwen3", "mixtral", "qwen3_moe" or "gpt2")."""

    def __init__(self, torch, config, weights, device):
        self.device = device
        kind = config.get("model_type", "")
        if kind in ("llama", "mixtral", "qwen3", "qwen3_moe"):
            self.fn = lambda ids: llama_logits(torch, config, weights, ids)
        elif kind == "gpt2":
            weights = gpt2_weights(weights)
            self.fn = lambda ids: gpt2_logits(torch, config, weights, ids)
        else:
            raise ValueError(f"model_type {kind!r} is neither llama nor gpt2")

    def __call__(self, ids):
        return self.fn(ids)
