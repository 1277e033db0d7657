package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// target records what the server asked of it.
type target struct{ calls []string }

func (t *target) Status() Status { t.calls = append(t.calls, "stat"); return Status{} }
func (t *target) Set(spec string) (string, error) {
	t.calls = append(t.calls, "set")
	if spec == "" {
		return "", errors.New("empty")
	}
	return "", nil
}
func (t *target) Resync(rate int64) error { t.calls = append(t.calls, "resync"); return nil }
func (t *target) Reload() (string, error) { t.calls = append(t.calls, "reload"); return "", nil }
func (t *target) MirrorAdd(dir string) (string, error) {
	t.calls = append(t.calls, "mirror-add")
	return "", nil
}
func (t *target) Tag(pid int32, name string) error {
	t.calls = append(t.calls, "tag")
	return nil
}

// FuzzAnswer: whatever a client sends, the server answers with exactly
// one JSON response and asks its target for at most the one operation the
// request names.
func FuzzAnswer(f *testing.F) {
	for _, s := range []string{`{"op":"stat"}`, `{"op":"set","limit":"default rbps=1MiB"}`, `{"op":"tag","pid":1,"group":"g"}`,
		`{"op":"resync","rate":-1}`, `{"op":"reload"}`, `{"op":"mirror-add","dir":"/d"}`, `{"op":"nope"}`, `{"op":`, ``, `[]`, `{"op":"set","limit":""}`, "{\"op\":\"stat\"}\n{\"op\":\"reload\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		tg := &target{}
		var out bytes.Buffer
		(&Server{t: tg}).answer(bytes.NewReader(in), &out)
		dec := json.NewDecoder(&out)
		var resp response
		if err := dec.Decode(&resp); err != nil {
			t.Fatalf("answer to %q is not a JSON response: %v (%q)", in, err, out.String())
		}
		if dec.More() {
			t.Fatalf("answer to %q holds more than one response: %q", in, out.String())
		}
		if len(tg.calls) > 1 {
			t.Fatalf("one request %q made the target do %v", in, tg.calls)
		}
		// The server reads the first JSON value sent.
		var req request
		if err := json.NewDecoder(bytes.NewReader(in)).Decode(&req); err != nil {
			if len(tg.calls) > 0 {
				t.Fatalf("a request that does not decode, %q, made the target do %v", in, tg.calls)
			}
			return
		}
		if len(tg.calls) == 1 && tg.calls[0] != req.Op {
			t.Fatalf("request %q (op %q) made the target do %v", in, req.Op, tg.calls)
		}
	})
}
