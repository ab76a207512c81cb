package lora

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadConfig: adapter_config.json is user input; ReadConfig must
// return an adapter config that validates, or an error, never panic.
func FuzzReadConfig(f *testing.F) {
	f.Add([]byte(`{"peft_type":"LORA","r":8,"lora_alpha":16,"target_modules":["q_proj","v_proj"]}`))
	f.Add([]byte(`{"peft_type":"LORA","r":8,"lora_alpha":16,"target_modules":"q_proj","use_rslora":true}`))
	f.Add([]byte(`{"peft_type":"LORA","r":-1,"lora_alpha":1e309,"target_modules":[1]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := ReadConfig(dir)
		if err != nil {
			return
		}
		if err := c.AdapterConfig.Validate(); err != nil {
			t.Fatalf("ReadConfig accepted an invalid config: %v", err)
		}
	})
}
