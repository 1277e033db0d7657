package backing

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// IntentFile in a mirror is a log of frames in a file of fixed size,
// written whole (zeros past its frames) when it is made, and then changed
// only by frames written past the last one: recording a file costs one
// write of a block already on the disk and one fdatasync, which writes no
// metadata of the file system. A frame is a 4-byte little-endian length
// n, the CRC-32C of the payload (4 bytes), and n bytes of payload, the
// JSON of an intentOp; a zero length, or a frame whose CRC does not match
// (one torn by a crash: it was never acknowledged), ends the log. A log
// with no room left is made anew with what is recorded then.

// intentLogSize is the size of a new log: about a thousand frames.
const intentLogSize = 256 << 10

// intentOp is one change of the record: ID recorded (again) as Rec, or
// the IDs in Del no longer recorded.
type intentOp struct {
	ID  uint64        `json:"id,omitempty"`
	Rec *intentRecord `json:"rec,omitempty"`
	Del []uint64      `json:"del,omitempty"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendFrames appends the frames of ops to b.
func appendFrames(b []byte, ops []intentOp) []byte {
	for _, op := range ops {
		p, _ := json.Marshal(op)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
		b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(p, castagnoli))
		b = append(b, p...)
	}
	return b
}

// parseLog returns what the log b records, by ID.
func parseLog(b []byte) map[uint64]intentRecord {
	recs := map[uint64]intentRecord{}
	for len(b) >= 8 {
		n, sum := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
		if n == 0 || uint64(n) > uint64(len(b)-8) {
			break
		}
		p := b[8 : 8+n]
		var op intentOp
		if crc32.Checksum(p, castagnoli) != sum || json.Unmarshal(p, &op) != nil {
			break
		}
		if op.Rec != nil {
			recs[op.ID] = *op.Rec
		}
		for _, id := range op.Del {
			delete(recs, id)
		}
		b = b[8+n:]
	}
	return recs
}

// intentLog is the IntentFile of one mirror, open for appending frames.
type intentLog struct {
	f         *os.File
	off, size int64
}

var errLogFull = errors.New("intent log full")

// newIntentLog makes dir's IntentFile anew, recording recs, synced with
// its directory, and opens it.
func newIntentLog(dir string, recs map[uint64]intentRecord) (*intentLog, error) {
	ops := make([]intentOp, 0, len(recs))
	for id, r := range recs {
		ops = append(ops, intentOp{ID: id, Rec: &r})
	}
	frames := appendFrames(nil, ops)
	size := max(intentLogSize, 2*int64(len(frames)))
	b := make([]byte, size)
	copy(b, frames)
	if err := writeDurable(dir, IntentFile, b); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, IntentFile), os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &intentLog{f: f, off: int64(len(frames)), size: size}, nil
}

// append writes frames past the last one, synced when sync is set; it
// fails with errLogFull, writing nothing, when they do not fit.
func (l *intentLog) append(frames []byte, sync bool) error {
	if l.off+int64(len(frames)) > l.size {
		return errLogFull
	}
	for done := 0; done < len(frames); {
		n, err := unix.Pwrite(int(l.f.Fd()), frames[done:], l.off+int64(done))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return syscall.EIO
		}
		done += n
	}
	l.off += int64(len(frames))
	if sync {
		return unix.Fdatasync(int(l.f.Fd()))
	}
	return nil
}

func (l *intentLog) close() {
	if l != nil {
		l.f.Close()
	}
}
