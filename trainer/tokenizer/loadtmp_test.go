package tokenizer
import ("testing";"path/filepath")
func BenchmarkLoadTmp(b *testing.B){ dir:="../../.cache/qwen-tokenizer"; for i:=0;i<b.N;i++{ if _,err:=LoadDir(dir);err!=nil{b.Fatal(err)} }; _ = filepath.Join }
