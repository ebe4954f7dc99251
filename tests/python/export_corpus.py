"""The corpus of architecture families autocastgen.export is tested on (test_export_corpus.py; issue
57 item 1; the table in docs/export.md, "The corpus: every family torch.export takes"): every family
transformers builds from a small config and torch.export.export exports and runs, each built tiny
(hidden 32-64, 2 layers, nothing downloaded) so that a case costs seconds. The families PyTorch's
own export fails on (Longformer, LED, DBRX, Switch Transformers, NLLB-MoE) are listed there, not here.

A family is its name, its kind (decoder, encoder, encoder-decoder, vision, audio, MoE), the class
built, the config, the inputs and the output field read (one tensor, which a process without
transformers can compare), and the Python modules a process loading its program must import first
(the model's own custom ops: transformers' MoE experts call transformers::grouped_mm_fallback,
registered by transformers.integrations.moe). `section` picks the module a test's `modules:`
section puts in float32 (a "place"): the last leaf module with a weight matrix that the forward
runs and the output depends on, unless the family names one.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

VOCAB = 128
BATCH, SEQUENCE = 2, 16


class Field(torch.nn.Module):
    """A transformers model returning one field of its output (a tensor)."""

    def __init__(self, model: torch.nn.Module, field: str, **kwargs: object) -> None:
        super().__init__()
        self.model, self.field, self.kwargs = model, field, kwargs

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(*args, **self.kwargs), self.field)


class EncoderDecoder(torch.nn.Module):
    """An encoder-decoder on (encoder input, decoder input ids), returning its logits; the encoder's
    input is named `inputs` (input_ids, input_features, ...)."""

    def __init__(self, model: torch.nn.Module, inputs: str = "input_ids", mask: bool = False) -> None:
        super().__init__()
        self.model, self.inputs, self.mask = model, inputs, mask

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        kwargs = {"attention_mask": torch.ones_like(x)} if self.mask else {}
        return self.model(**{self.inputs: x}, decoder_input_ids=y, use_cache=False, **kwargs).logits


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    kind: str  # decoder, encoder, encoder-decoder, vision, audio, MoE
    model_class: str  # transformers.<model_class>(transformers.<config_class>(**config))
    config_class: str
    config: dict[str, Any]
    inputs: str  # ids, seq2seq, image, image-noise, waveform, spectrogram, {features,frames,waveform}-seq2seq
    field: str = "logits"
    imports: tuple[str, ...] = ()  # what a loading process imports first (custom ops)
    section: str | None = None  # the module put in float32; None: the last leaf with a weight matrix
    mask: bool = False  # an encoder-decoder given an attention mask of ones (the encoder needs one traced)
    note: str = ""


# Decoders: a Llama-like config; the others name their own fields.
_LLAMA_LIKE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=0, eos_token_id=0)
_BERT_LIKE = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                  max_position_embeddings=64, pad_token_id=0)
_BART_LIKE = dict(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
                  pad_token_id=0, bos_token_id=0, eos_token_id=1, decoder_start_token_id=0, use_cache=False)
_T5_LIKE = dict(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
                relative_attention_num_buckets=8, relative_attention_max_distance=16, decoder_start_token_id=0,
                pad_token_id=0, eos_token_id=1, use_cache=False)
_VIT_LIKE = dict(image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2,
                 num_attention_heads=4, intermediate_size=128)
_MOE = dict(_LLAMA_LIKE, num_experts_per_tok=2)
_WAV2VEC2_LIKE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                      conv_dim=(16, 16), conv_stride=(4, 4), conv_kernel=(8, 8), num_conv_pos_embeddings=16,
                      num_conv_pos_embedding_groups=2, vocab_size=32)


def _decoder(name: str, model: str, config: str, **kwargs: Any) -> Family:
    return Family(name, "decoder", model, config, {**_LLAMA_LIKE, **kwargs}, "ids")


FAMILIES: list[Family] = [
    # Decoder-only language models (use_cache=False: the logits of the whole sequence).
    _decoder("llama", "LlamaForCausalLM", "LlamaConfig"),
    _decoder("mistral", "MistralForCausalLM", "MistralConfig"),
    _decoder("qwen2", "Qwen2ForCausalLM", "Qwen2Config"),
    _decoder("qwen3", "Qwen3ForCausalLM", "Qwen3Config", head_dim=16),
    _decoder("gemma", "GemmaForCausalLM", "GemmaConfig", head_dim=16),
    _decoder("gemma2", "Gemma2ForCausalLM", "Gemma2Config", head_dim=16),
    _decoder("gemma3", "Gemma3ForCausalLM", "Gemma3TextConfig", head_dim=16),
    _decoder("phi", "PhiForCausalLM", "PhiConfig"),
    _decoder("phi3", "Phi3ForCausalLM", "Phi3Config"),
    _decoder("olmo", "OlmoForCausalLM", "OlmoConfig"),
    _decoder("olmo2", "Olmo2ForCausalLM", "Olmo2Config"),
    _decoder("stablelm", "StableLmForCausalLM", "StableLmConfig"),
    _decoder("starcoder2", "Starcoder2ForCausalLM", "Starcoder2Config"),
    _decoder("granite", "GraniteForCausalLM", "GraniteConfig"),
    _decoder("cohere", "CohereForCausalLM", "CohereConfig"),
    _decoder("smollm3", "SmolLM3ForCausalLM", "SmolLM3Config"),
    _decoder("glm4", "Glm4ForCausalLM", "Glm4Config", head_dim=16),
    Family("gpt2", "decoder", "GPT2LMHeadModel", "GPT2Config",
           dict(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0),
           "ids"),
    Family("gpt_neox", "decoder", "GPTNeoXForCausalLM", "GPTNeoXConfig", dict(_BERT_LIKE), "ids"),
    Family("gptj", "decoder", "GPTJForCausalLM", "GPTJConfig",
           dict(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, bos_token_id=0,
                eos_token_id=0), "ids"),
    Family("gpt_neo", "decoder", "GPTNeoForCausalLM", "GPTNeoConfig",
           dict(vocab_size=VOCAB, max_position_embeddings=64, hidden_size=64, num_layers=2, num_heads=4,
                attention_types=[[["global", "local"], 1]], window_size=8, bos_token_id=0, eos_token_id=0), "ids"),
    Family("codegen", "decoder", "CodeGenForCausalLM", "CodeGenConfig",
           dict(vocab_size=VOCAB, n_positions=64, n_ctx=64, n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
                bos_token_id=0, eos_token_id=0), "ids"),
    Family("opt", "decoder", "OPTForCausalLM", "OPTConfig",
           dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_dim=128,
                max_position_embeddings=64, word_embed_proj_dim=64, pad_token_id=1, bos_token_id=0, eos_token_id=0),
           "ids"),
    Family("bloom", "decoder", "BloomForCausalLM", "BloomConfig",
           dict(vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0), "ids"),
    Family("falcon", "decoder", "FalconForCausalLM", "FalconConfig",
           dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, bos_token_id=0,
                eos_token_id=0), "ids"),
    Family("mpt", "decoder", "MptForCausalLM", "MptConfig",
           dict(vocab_size=VOCAB, d_model=64, n_layers=2, n_heads=4, max_seq_len=64), "ids"),
    Family("mamba", "decoder", "MambaForCausalLM", "MambaConfig", dict(vocab_size=VOCAB, hidden_size=64, state_size=8,
           num_hidden_layers=2, expand=2, conv_kernel=4, use_mambapy=False, pad_token_id=0, bos_token_id=0,
           eos_token_id=0), "ids"),
    Family("mamba2", "decoder", "Mamba2ForCausalLM", "Mamba2Config", dict(vocab_size=VOCAB, hidden_size=64,
           state_size=8, num_hidden_layers=2, expand=2, num_heads=8, head_dim=16, n_groups=1, chunk_size=8,
           pad_token_id=0, bos_token_id=0, eos_token_id=0), "ids"),
    Family("recurrent_gemma", "decoder", "RecurrentGemmaForCausalLM", "RecurrentGemmaConfig", dict(vocab_size=VOCAB,
           hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
           lru_width=64, attention_window_size=8, pad_token_id=0, bos_token_id=0, eos_token_id=0,
           block_types=["recurrent", "attention"]), "ids"),
    Family("biogpt", "decoder", "BioGptForCausalLM", "BioGptConfig", dict(_BERT_LIKE), "ids"),
    Family("xglm", "decoder", "XGLMForCausalLM", "XGLMConfig", dict(vocab_size=VOCAB, d_model=64, num_layers=2,
           attention_heads=4, ffn_dim=128, max_position_embeddings=64, pad_token_id=1), "ids"),
    Family("ernie4_5", "decoder", "Ernie4_5ForCausalLM", "Ernie4_5Config", dict(_LLAMA_LIKE, head_dim=16), "ids"),
    Family("persimmon", "decoder", "PersimmonForCausalLM", "PersimmonConfig", dict(_LLAMA_LIKE), "ids"),
    # Mixture of experts: transformers' experts call its grouped GEMM (a custom op) on the CPU.
    Family("mixtral", "MoE", "MixtralForCausalLM", "MixtralConfig", dict(_MOE, num_local_experts=4), "ids",
           imports=("transformers.integrations.moe",)),
    Family("qwen2_moe", "MoE", "Qwen2MoeForCausalLM", "Qwen2MoeConfig",
           dict(_MOE, num_experts=4, moe_intermediate_size=64, shared_expert_intermediate_size=64), "ids",
           imports=("transformers.integrations.moe",)),
    Family("qwen3_moe", "MoE", "Qwen3MoeForCausalLM", "Qwen3MoeConfig",
           dict(_MOE, num_experts=4, moe_intermediate_size=64, head_dim=16), "ids",
           imports=("transformers.integrations.moe",)),
    Family("olmoe", "MoE", "OlmoeForCausalLM", "OlmoeConfig", dict(_MOE, num_experts=4), "ids",
           imports=("transformers.integrations.moe",)),
    Family("phimoe", "MoE", "PhimoeForCausalLM", "PhimoeConfig", dict(_MOE, num_local_experts=4), "ids",
           imports=("transformers.integrations.moe",)),
    Family("granitemoe", "MoE", "GraniteMoeForCausalLM", "GraniteMoeConfig", dict(_MOE, num_local_experts=4), "ids",
           imports=("transformers.integrations.moe",)),
    Family("gpt_oss", "MoE", "GptOssForCausalLM", "GptOssConfig", dict(_MOE, num_local_experts=4, head_dim=16,
           sliding_window=8), "ids", imports=("transformers.integrations.moe",)),
    Family("deepseek_v3", "MoE", "DeepseekV3ForCausalLM", "DeepseekV3Config", dict(_MOE, n_routed_experts=4,
           n_shared_experts=1, moe_intermediate_size=32, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8,
           v_head_dim=16, qk_nope_head_dim=8, n_group=1, topk_group=1, first_k_dense_replace=1, num_key_value_heads=4),
           "ids", imports=("transformers.integrations.moe",)),
    Family("llama4_text", "MoE", "Llama4ForCausalLM", "Llama4TextConfig", dict(_MOE, num_local_experts=4, head_dim=16,
           intermediate_size_mlp=128, interleave_moe_layer_step=1), "ids",
           note="experts as batched matmuls: no custom op"),
    Family("jamba", "MoE", "JambaForCausalLM", "JambaConfig", dict(_MOE, num_experts=4, attn_layer_period=2,
           attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1, mamba_d_state=8, mamba_expand=2), "ids",
           imports=("transformers.integrations.moe",)),
    # Encoders: the last hidden state.
    Family("bert", "encoder", "BertModel", "BertConfig", dict(_BERT_LIKE), "ids", "last_hidden_state"),
    Family("roberta", "encoder", "RobertaModel", "RobertaConfig", dict(_BERT_LIKE, pad_token_id=1), "ids",
           "last_hidden_state"),
    Family("xlm_roberta", "encoder", "XLMRobertaModel", "XLMRobertaConfig", dict(_BERT_LIKE, pad_token_id=1), "ids",
           "last_hidden_state"),
    Family("electra", "encoder", "ElectraModel", "ElectraConfig", dict(_BERT_LIKE, embedding_size=32), "ids",
           "last_hidden_state"),
    Family("albert", "encoder", "AlbertModel", "AlbertConfig", dict(_BERT_LIKE, embedding_size=32), "ids",
           "last_hidden_state"),
    Family("distilbert", "encoder", "DistilBertModel", "DistilBertConfig",
           dict(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=64,
                pad_token_id=0), "ids", "last_hidden_state"),
    Family("deberta_v2", "encoder", "DebertaV2Model", "DebertaV2Config",
           dict(_BERT_LIKE, relative_attention=True, position_buckets=8, pos_att_type=["p2c", "c2p"]), "ids",
           "last_hidden_state"),
    Family("mpnet", "encoder", "MPNetModel", "MPNetConfig", dict(_BERT_LIKE, pad_token_id=1), "ids",
           "last_hidden_state"),
    Family("modernbert", "encoder", "ModernBertModel", "ModernBertConfig",
           dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                max_position_embeddings=64, pad_token_id=0, bos_token_id=0, eos_token_id=0, cls_token_id=0,
                sep_token_id=0, local_attention=8), "ids", "last_hidden_state"),
    Family("mobilebert", "encoder", "MobileBertModel", "MobileBertConfig",
           dict(_BERT_LIKE, embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32,
                num_feedforward_networks=1),
           "ids", "last_hidden_state"),
    Family("big_bird", "encoder", "BigBirdModel", "BigBirdConfig", dict(_BERT_LIKE, attention_type="original_full"),
           "ids", "last_hidden_state"),
    Family("funnel", "encoder", "FunnelModel", "FunnelConfig", dict(vocab_size=VOCAB, block_sizes=[1, 1], d_model=64,
           n_head=4, d_head=16, d_inner=128), "ids", "last_hidden_state"),
    Family("xlnet", "encoder", "XLNetModel", "XLNetConfig", dict(vocab_size=VOCAB, d_model=64, n_layer=2, n_head=4,
           d_inner=128), "ids", "last_hidden_state", ),
    Family("squeezebert", "encoder", "SqueezeBertModel", "SqueezeBertConfig", dict(_BERT_LIKE, embedding_size=64),
           "ids", "last_hidden_state"),
    Family("fnet", "encoder", "FNetModel", "FNetConfig", dict(_BERT_LIKE), "ids", "last_hidden_state"),
    Family("clip_text", "encoder", "CLIPTextModel", "CLIPTextConfig",
           dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=64, pad_token_id=0, bos_token_id=0, eos_token_id=1), "ids",
           "last_hidden_state"),
    # Encoder-decoders: (input ids, decoder input ids) -> logits.
    Family("t5", "encoder-decoder", "T5ForConditionalGeneration", "T5Config", dict(_T5_LIKE), "seq2seq"),
    Family("mt5", "encoder-decoder", "MT5ForConditionalGeneration", "MT5Config", dict(_T5_LIKE), "seq2seq"),
    Family("bart", "encoder-decoder", "BartForConditionalGeneration", "BartConfig", dict(_BART_LIKE), "seq2seq"),
    Family("mbart", "encoder-decoder", "MBartForConditionalGeneration", "MBartConfig", dict(_BART_LIKE), "seq2seq"),
    Family("pegasus", "encoder-decoder", "PegasusForConditionalGeneration", "PegasusConfig", dict(_BART_LIKE),
           "seq2seq"),
    Family("marian", "encoder-decoder", "MarianMTModel", "MarianConfig", dict(_BART_LIKE), "seq2seq"),
    Family("blenderbot", "encoder-decoder", "BlenderbotForConditionalGeneration", "BlenderbotConfig", dict(_BART_LIKE),
           "seq2seq"),
    Family("m2m100", "encoder-decoder", "M2M100ForConditionalGeneration", "M2M100Config", dict(_BART_LIKE),
           "seq2seq"),
    Family("longt5", "encoder-decoder", "LongT5ForConditionalGeneration", "LongT5Config", dict(_T5_LIKE,
           local_radius=4), "seq2seq", mask=True),
    Family("umt5", "encoder-decoder", "UMT5ForConditionalGeneration", "UMT5Config", dict(_T5_LIKE), "seq2seq"),
    # Vision: (2, 3, 32, 32) images.
    Family("vit", "vision", "ViTModel", "ViTConfig", dict(_VIT_LIKE), "image", "last_hidden_state"),
    Family("deit", "vision", "DeiTModel", "DeiTConfig", dict(_VIT_LIKE), "image", "last_hidden_state"),
    Family("beit", "vision", "BeitModel", "BeitConfig", dict(_VIT_LIKE), "image", "last_hidden_state"),
    Family("dinov2", "vision", "Dinov2Model", "Dinov2Config", dict(_VIT_LIKE), "image", "last_hidden_state"),
    Family("clip_vision", "vision", "CLIPVisionModel", "CLIPVisionConfig", dict(_VIT_LIKE), "image",
           "last_hidden_state"),
    Family("siglip_vision", "vision", "SiglipVisionModel", "SiglipVisionConfig", dict(_VIT_LIKE), "image",
           "last_hidden_state"),
    Family("swin", "vision", "SwinModel", "SwinConfig",
           dict(image_size=32, patch_size=4, num_channels=3, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                window_size=4), "image", "last_hidden_state"),
    Family("convnext", "vision", "ConvNextModel", "ConvNextConfig",
           dict(num_channels=3, num_stages=2, hidden_sizes=[16, 32], depths=[1, 1]), "image", "last_hidden_state"),
    Family("resnet", "vision", "ResNetModel", "ResNetConfig",
           dict(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic"), "image",
           "last_hidden_state"),
    Family("regnet", "vision", "RegNetModel", "RegNetConfig",
           dict(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], groups_width=8), "image",
           "last_hidden_state"),
    Family("mobilenet_v2", "vision", "MobileNetV2Model", "MobileNetV2Config",
           dict(num_channels=3, image_size=32, depth_multiplier=0.25), "image", "last_hidden_state"),
    Family("segformer", "vision", "SegformerModel", "SegformerConfig",
           dict(num_channels=3, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2]), "image",
           "last_hidden_state"),
    Family("convnextv2", "vision", "ConvNextV2Model", "ConvNextV2Config", dict(num_channels=3, num_stages=2,
           hidden_sizes=[16, 32], depths=[1, 1]), "image", "last_hidden_state"),
    Family("efficientnet", "vision", "EfficientNetModel", "EfficientNetConfig", dict(num_channels=3, image_size=32,
           width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320), "image", "last_hidden_state"),
    Family("levit", "vision", "LevitModel", "LevitConfig", dict(image_size=32, num_channels=3, hidden_sizes=[32, 48,
           64], num_attention_heads=[2, 2, 2], depths=[1, 1, 1], key_dim=[8, 8, 8]), "image", "last_hidden_state"),
    Family("mobilevit", "vision", "MobileViTModel", "MobileViTConfig", dict(num_channels=3, image_size=32,
           patch_size=2, hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 16, 24, 32, 48, 64, 96]), "image",
           "last_hidden_state"),
    Family("swinv2", "vision", "Swinv2Model", "Swinv2Config", dict(image_size=32, patch_size=4, num_channels=3,
           embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4), "image", "last_hidden_state"),
    Family("yolos", "vision", "YolosModel", "YolosConfig", dict(_VIT_LIKE, image_size=[32, 32],
           num_detection_tokens=4), "image", "last_hidden_state"),
    Family("vit_mae", "vision", "ViTMAEModel", "ViTMAEConfig", dict(_VIT_LIKE, mask_ratio=0.0), "image-noise",
           "last_hidden_state"),
    Family("poolformer", "vision", "PoolFormerModel", "PoolFormerConfig", dict(num_channels=3, hidden_sizes=[16, 32],
           depths=[1, 1], num_encoder_blocks=2, patch_sizes=[7, 3], strides=[4, 2], padding=[2, 1], pool_size=3),
           "image", "last_hidden_state"),
    # Audio: waveforms (2, 1600), or log-mel features with decoder ids (Whisper).
    Family("wav2vec2", "audio", "Wav2Vec2Model", "Wav2Vec2Config", dict(_WAV2VEC2_LIKE), "waveform",
           "last_hidden_state"),
    Family("hubert", "audio", "HubertModel", "HubertConfig", dict(_WAV2VEC2_LIKE), "waveform", "last_hidden_state"),
    Family("wavlm", "audio", "WavLMModel", "WavLMConfig", dict(_WAV2VEC2_LIKE, num_buckets=16, max_bucket_distance=32),
           "waveform", "last_hidden_state"),
    Family("data2vec_audio", "audio", "Data2VecAudioModel", "Data2VecAudioConfig", dict(_WAV2VEC2_LIKE), "waveform",
           "last_hidden_state"),
    Family("whisper", "audio", "WhisperForConditionalGeneration", "WhisperConfig",
           dict(vocab_size=VOCAB, num_mel_bins=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, d_model=64,
                max_source_positions=16, max_target_positions=32, pad_token_id=0, bos_token_id=0, eos_token_id=1,
                decoder_start_token_id=0, suppress_tokens=[], begin_suppress_tokens=[], use_cache=False),
           "features-seq2seq"),
    Family("sew", "audio", "SEWModel", "SEWConfig", dict(_WAV2VEC2_LIKE, squeeze_factor=2), "waveform",
           "last_hidden_state"),
    Family("unispeech", "audio", "UniSpeechModel", "UniSpeechConfig", dict(_WAV2VEC2_LIKE), "waveform",
           "last_hidden_state"),
    Family("wav2vec2_conformer", "audio", "Wav2Vec2ConformerModel", "Wav2Vec2ConformerConfig", dict(_WAV2VEC2_LIKE,
           conv_depthwise_kernel_size=3, position_embeddings_type="relative"), "waveform", "last_hidden_state"),
    Family("ast", "audio", "ASTModel", "ASTConfig", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
           intermediate_size=128, patch_size=8, frequency_stride=8, time_stride=8, max_length=32, num_mel_bins=16),
           "spectrogram", "last_hidden_state"),
    Family("speech_to_text", "audio", "Speech2TextForConditionalGeneration", "Speech2TextConfig", dict(_BART_LIKE,
           input_feat_per_channel=16, max_source_positions=64, max_target_positions=64, conv_channels=32,
           num_conv_layers=2), "frames-seq2seq"),
    Family("moonshine", "audio", "MoonshineForConditionalGeneration", "MoonshineConfig", dict(vocab_size=VOCAB,
           hidden_size=64, intermediate_size=128, encoder_num_hidden_layers=2, decoder_num_hidden_layers=2,
           encoder_num_attention_heads=4, decoder_num_attention_heads=4, max_position_embeddings=64, pad_token_id=0,
           bos_token_id=0, eos_token_id=1, decoder_start_token_id=0), "waveform-seq2seq"),
]

BY_NAME = {family.name: family for family in FAMILIES}


def inputs(family: Family, config: Any) -> tuple[torch.Tensor, ...]:
    """The family's example inputs (seeded by the caller)."""
    ids = torch.randint(2, VOCAB, (BATCH, SEQUENCE))
    if family.inputs == "ids":
        return (ids,)
    if family.inputs == "seq2seq":
        return ids, torch.randint(2, VOCAB, (BATCH, 12))
    if family.inputs == "image":
        return (torch.randn(BATCH, 3, 32, 32),)
    if family.inputs == "image-noise":  # ViTMAE: the noise that orders its patches, an input
        return torch.randn(BATCH, 3, 32, 32), torch.rand(BATCH, (config.image_size // config.patch_size) ** 2)
    if family.inputs == "waveform":
        return (torch.randn(BATCH, 1600),)
    if family.inputs == "spectrogram":  # AST: (batch, frames, mel bins)
        return (torch.randn(BATCH, config.max_length, config.num_mel_bins),)
    decoder_ids = torch.randint(2, VOCAB, (BATCH, 12))
    if family.inputs == "features-seq2seq":
        # Whisper: log-mel features, twice the encoder's positions long (its two convolutions halve it).
        return torch.randn(BATCH, config.num_mel_bins, 2 * config.max_source_positions), decoder_ids
    if family.inputs == "frames-seq2seq":  # Speech2Text: (batch, frames, features)
        return torch.randn(BATCH, 32, config.input_feat_per_channel), decoder_ids
    return torch.randn(BATCH, 1600), decoder_ids  # waveform-seq2seq: Moonshine


def build(transformers: Any, family: Family) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The family's model (eval mode, seeded) wrapped to return one tensor, and its inputs."""
    torch.manual_seed(0)
    config = getattr(transformers, family.config_class)(**family.config)
    model = getattr(transformers, family.model_class)(config)
    if family.inputs == "seq2seq":
        wrapped: torch.nn.Module = EncoderDecoder(model, mask=family.mask)
    elif family.inputs in ("features-seq2seq", "frames-seq2seq"):
        wrapped = EncoderDecoder(model, "input_features")
    elif family.inputs == "waveform-seq2seq":
        wrapped = EncoderDecoder(model, "input_values")
    elif family.kind in ("decoder", "MoE"):
        wrapped = Field(model, family.field, use_cache=False)
    else:
        wrapped = Field(model, family.field)
    wrapped.eval()
    return wrapped, inputs(family, config)


def section(family: Family, model: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> str:
    """The module the family's `modules:` section puts in float32: its own, or the last leaf module
    with a weight matrix (Linear, transformers' Conv1D, a convolution; not an embedding) that the
    forward runs and whose result the output depends on (a pooler whose output the model computes
    and the wrapper drops is not in the program)."""
    if family.section is not None:
        return family.section
    ran: list[tuple[str, torch.Tensor]] = []
    hooks = [module.register_forward_hook(lambda _m, _i, out, name=name: ran.append((name, out)))
             for name, module in model.named_modules()
             if not any(True for _ in module.children()) and not isinstance(module, torch.nn.Embedding)
             and isinstance(getattr(module, "weight", None), torch.Tensor) and module.weight.dim() >= 2]
    try:
        output = model(*args)
    finally:
        for hook in hooks:
            hook.remove()
    for name, out in reversed(ran):
        if isinstance(out, torch.Tensor) and out.requires_grad and torch.autograd.grad(
                output.sum(), out, retain_graph=True, allow_unused=True)[0] is not None:
            return name
    raise AssertionError(f"{family.name}: no leaf module with a weight matrix that the output depends on ran")
