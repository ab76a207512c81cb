package hfconfig

import (
	"strings"
	"testing"
)

// A trimmed copy of the fields of Qwen2.5-0.5B-Instruct's config.json, as
// published, written out here by hand.
const qwenConfig = `{
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 21,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
}`

func TestParseQwenMatchesPreset(t *testing.T) {
	c, err := Parse([]byte(qwenConfig))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := Preset("qwen2.5-0.5b")
	if c.HiddenSize != p.HiddenSize || c.NumLayers != p.NumLayers || c.HeadDim != 64 ||
		c.NumKVHeads != 2 || c.RopeTheta != 1e6 || c.RMSNormEps != 1e-6 || !c.TieWordEmbeddings ||
		!c.AttentionBias || c.Dtype != "bfloat16" || c.EOSTokenIDs[0] != 151645 || c.VocabSize != 151936 {
		t.Fatalf("parsed %+v", c)
	}
	// Qwen2.5-0.5B has 494,032,768 parameters (tied embeddings).
	if n := c.NumParams(); n != 494032768 {
		t.Fatalf("NumParams = %d, want 494032768", n)
	}
}

func TestParseVariants(t *testing.T) {
	cases := []struct {
		name, json string
		check      func(*Config) bool
		wantErr    string
	}{
		{"rope_parameters and dtype", `{"model_type":"qwen2","hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4,"rope_parameters":{"rope_theta":5000,"rope_type":"default"},"dtype":"float32"}`,
			func(c *Config) bool {
				return c.RopeTheta == 5000 && c.Dtype == "float32" && c.NumKVHeads == 2 && c.HeadDim == 4
			}, ""},
		{"llama without bias", `{"model_type":"llama","hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4,"eos_token_id":[1,2]}`,
			func(c *Config) bool { return !c.AttentionBias && len(c.EOSTokenIDs) == 2 && c.RopeTheta == 10000 }, ""},
		{"llama with bias", `{"model_type":"llama","attention_bias":true,"hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4}`,
			func(c *Config) bool { return c.AttentionBias }, ""},
		{"rope scaling", `{"model_type":"qwen2","hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4,"rope_scaling":{"type":"yarn"}}`, nil, "rope_scaling"},
		{"gqa mismatch", `{"model_type":"qwen2","hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":3,"num_key_value_heads":2,"vocab_size":4}`, nil, "multiple"},
		{"unknown type", `{"model_type":"gpt2"}`, nil, "not supported"},
		{"zero layers", `{"model_type":"qwen2","hidden_size":8,"intermediate_size":8,"num_hidden_layers":0,"num_attention_heads":2,"vocab_size":4}`, nil, "num_hidden_layers"},
		{"gelu", `{"model_type":"qwen2","hidden_act":"gelu","hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4}`, nil, "hidden_act"},
		{"not json", `{`, nil, "decode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.json))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Fatalf("parsed %+v", c)
			}
		})
	}
}

func TestMarshalRoundTripKeepsUnknownFields(t *testing.T) {
	c, err := Parse([]byte(qwenConfig))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Marshal("float32")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"max_window_layers": 21`) || !strings.Contains(string(b), `"torch_dtype": "float32"`) {
		t.Fatalf("marshalled config lost fields:\n%s", b)
	}
	c2, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if c2.NumParams() != c.NumParams() || c2.RopeTheta != c.RopeTheta || c2.Dtype != "float32" {
		t.Fatalf("round trip changed config: %+v", c2)
	}
}

func TestPresets(t *testing.T) {
	for _, n := range PresetNames() {
		c, err := Preset(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		b, err := c.Marshal("float32")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(b); err != nil {
			t.Fatalf("%s does not re-parse: %v", n, err)
		}
	}
	c, _ := Preset("10m")
	if n := c.NumParams(); n < 8e6 || n > 12e6 {
		t.Fatalf("10m preset has %d params", n)
	}
	if _, err := Preset("nope"); err == nil {
		t.Fatal("want error for unknown preset")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(qwenConfig))
	f.Add([]byte(`{"model_type":"llama","eos_token_id":[1,"x"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			return
		}
		if c.NumKVHeads <= 0 || c.NumHeads%c.NumKVHeads != 0 {
			t.Fatalf("accepted invalid heads %+v", c)
		}
	})
}
