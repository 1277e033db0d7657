package device

import "time"

// Faulty wraps a File with injected latency and errors. Each call first
// sleeps for Delay's answer (time.Sleep: virtual under testing/synctest),
// then fails with Fail's answer if it is not nil, else goes to File. Nil
// functions inject nothing.
type Faulty struct {
	File  File
	Delay func(op Op, off, n int64) time.Duration
	Fail  func(op Op, off, n int64) error
}

func (f *Faulty) do(op Op, off, n int64) error {
	if f.Delay != nil {
		if d := f.Delay(op, off, n); d > 0 {
			time.Sleep(d)
		}
	}
	if f.Fail != nil {
		return f.Fail(op, off, n)
	}
	return nil
}

func (f *Faulty) ReadAt(p []byte, off int64) (int, error) {
	if err := f.do(Read, off, int64(len(p))); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *Faulty) WriteAt(p []byte, off int64) (int, error) {
	if err := f.do(Write, off, int64(len(p))); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *Faulty) Sync() error {
	if err := f.do(Flush, 0, 0); err != nil {
		return err
	}
	return f.File.Sync()
}
