package trace

import "testing"

func BenchmarkDecode(b *testing.B) {
	for _, ev := range []Event{sampleEvents()[3], sampleEvents()[8]} {
		rec, err := Encode(ev)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(typeName(ev), func(b *testing.B) {
			for b.Loop() {
				if _, err := Decode(rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func typeName(ev Event) string {
	switch ev.(type) {
	case *RMCall:
		return "rm-control"
	case *Call:
		return "call"
	}
	return "other"
}
