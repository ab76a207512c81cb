// Package lora reads and writes LoRA adapters in PEFT's on-disk layout
// (adapter_config.json plus adapter_model.safetensors, the files
// transformers + peft and vLLM load), and merges an adapter into its base
// model.
//
// The adapter itself, its initialisation and its forward and backward live
// in trainer/model (model.Adapter), next to the layers they modify. This
// package deliberately holds no numerics beyond the merge, and knows
// nothing of training or serving.
package lora
