package control

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// Handing is a mount as its process hands it to another (sluice mount
// --takeover): its state, opaque here, and the descriptors the state
// names, which the control socket sends with SCM_RIGHTS and then closes.
type Handing struct {
	State []byte
	Fds   []int
	// Commit runs once the other process has taken the mount, after this
	// control socket is closed and before the other process is told: it
	// closes what the other process must open again (listeners, leases).
	Commit func()
	// Done runs once the other process has been told: this process serves
	// no more.
	Done func()
	// Abort runs when the other process did not take the mount (it said
	// why, or went away): this process serves again.
	Abort func(reason string)
}

// Handoverer is a Target whose mount can be handed over.
type Handoverer interface {
	// Handover stops the mount serving and returns its state, or an
	// error saying why it cannot be handed over (it then serves on).
	// taker is the pid of the process asking.
	Handover(taker int) (*Handing, error)
}

// HandoverTimeout bounds the first part of a handover: the mount's
// requests being served must be answered and its state sent within it.
const HandoverTimeout = 60 * time.Second

// verdictTimeout bounds the second: the taking process must build the
// mount from the state and say whether it takes it within it. The handing
// process waits twice as long for the verdict.
const verdictTimeout = 60 * time.Second

// maxRights is the most descriptors one message carries (the kernel's
// SCM_MAX_FD).
const maxRights = 253

// handoverHeader is the first frame of a handover's answer.
type handoverHeader struct {
	Error string `json:"error,omitempty"`
	State []byte `json:"state,omitempty"`
	Fds   int    `json:"fds"`
}

// verdict is what the taking process answers.
type verdict struct {
	Taken bool   `json:"taken,omitempty"`
	Error string `json:"error,omitempty"`
}

// handover serves an "op":"handover" request on c: the state and its
// descriptors out, the verdict in.
func (s *Server) handover(c *net.UnixConn) {
	c.SetDeadline(time.Now().Add(HandoverTimeout))
	t, ok := s.t.(Handoverer)
	if !ok {
		writeFrame(c, handoverHeader{Error: "this mount cannot be handed over"}, nil)
		return
	}
	h, err := t.Handover(peerPid(c))
	if err != nil {
		writeFrame(c, handoverHeader{Error: err.Error()}, nil)
		return
	}
	defer func() {
		for _, fd := range h.Fds {
			unix.Close(fd)
		}
	}()
	err = SendState(c, h.State, h.Fds)
	var v verdict
	if err == nil {
		// The taker has verdictTimeout from here; this side waits
		// longer, so that it never gives up on a taker that has not.
		c.SetDeadline(time.Now().Add(2 * verdictTimeout))
		err = readFrame(c, &v, nil)
	}
	switch {
	case err != nil:
		h.Abort(fmt.Sprintf("the taking process went away: %v", err))
		return
	case !v.Taken:
		h.Abort(v.Error)
		return
	}
	s.Close()
	h.Commit()
	writeFrame(c, verdict{Taken: true}, nil)
	h.Done()
}

// peerPid is the pid of the process at c's other end, 0 if unknown.
func peerPid(c *net.UnixConn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

// writeFrame sends v as JSON in one frame (a 4-byte length, then the
// bytes), with the descriptors fds attached.
func writeFrame(c *net.UnixConn, v any, fds []int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
	msg = append(msg, b...)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	// A stream socket takes part of a large frame at a time; the
	// descriptors go with its first part.
	for len(msg) > 0 {
		n, oobn, err := c.WriteMsgUnix(msg, oob, nil)
		if err != nil {
			return err
		}
		if oobn != len(oob) {
			return io.ErrShortWrite
		}
		msg, oob = msg[n:], nil
	}
	return nil
}

// frameReader reads frames and the descriptors sent with them.
type frameReader struct {
	c   *net.UnixConn
	buf []byte
	fds []int
}

// readFrame reads one frame of c into v, keeping the descriptors that came
// with it in *fds (closed when fds is nil).
func readFrame(c *net.UnixConn, v any, fds *[]int) error {
	r := &frameReader{c: c}
	err := r.next(v)
	if fds != nil {
		*fds = append(*fds, r.fds...)
	} else {
		closeFds(r.fds)
	}
	return err
}

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// next reads the next frame into v.
func (r *frameReader) next(v any) error {
	for {
		if len(r.buf) > 0 && r.buf[0] == '{' {
			// A plain response: the server refused (busy, not the
			// mounting user) before it read the request.
			var resp response
			if err := json.Unmarshal(r.buf, &resp); err == nil && resp.Error != "" {
				return errors.New(resp.Error)
			}
		}
		if len(r.buf) >= 4 {
			n := int(binary.BigEndian.Uint32(r.buf))
			if n > 64<<20 {
				return fmt.Errorf("frame of %d bytes", n)
			}
			if len(r.buf) >= 4+n {
				err := json.Unmarshal(r.buf[4:4+n], v)
				r.buf = r.buf[4+n:]
				return err
			}
		}
		b := make([]byte, 64<<10)
		oob := make([]byte, unix.CmsgSpace(4*maxRights)*4)
		n, oobn, flags, _, err := r.c.ReadMsgUnix(b, oob)
		if oobn > 0 {
			msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
			if perr == nil {
				for _, m := range msgs {
					if fds, err := unix.ParseUnixRights(&m); err == nil {
						r.fds = append(r.fds, fds...)
					}
				}
			}
		}
		if flags&unix.MSG_CTRUNC != 0 {
			return errors.New("descriptors lost: the control message was cut short")
		}
		r.buf = append(r.buf, b[:n]...)
		if err != nil {
			if errors.Is(err, io.EOF) || n == 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
	}
}

// Taking is a mount being taken over from the process that serves it:
// its state and descriptors, this process's own now. Taken or Abort ends
// it.
type Taking struct {
	State []byte
	Fds   []int
	c     *net.UnixConn
}

// Takeover asks the process serving the mount at mountpoint to hand it
// over: it stops serving, and its state and descriptors come here. Until
// Taken or Abort (or HandoverTimeout), nobody serves the mount: its
// applications wait.
func Takeover(mountpoint string) (*Taking, error) {
	c, err := dial(mountpoint)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(HandoverTimeout))
	if err := json.NewEncoder(c).Encode(request{Op: "handover"}); err != nil {
		c.Close()
		return nil, err
	}
	state, fds, err := ReceiveState(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Now().Add(verdictTimeout))
	return &Taking{State: state, Fds: fds, c: c}, nil
}

// SendState sends a mount's state and the descriptors it names over c, a
// stream socket, for ReceiveState at the other end: the state in one
// frame, the descriptors in as many as they need.
func SendState(c *net.UnixConn, state []byte, fds []int) error {
	err := writeFrame(c, handoverHeader{State: state, Fds: len(fds)}, nil)
	for i := 0; err == nil && i < len(fds); i += maxRights {
		chunk := fds[i:min(i+maxRights, len(fds))]
		err = writeFrame(c, len(chunk), chunk)
	}
	return err
}

// ReceiveState receives what SendState sent: the state and the
// descriptors, this process's own. An error sent in its place (a
// refusal) is returned as it was sent.
func ReceiveState(c *net.UnixConn) ([]byte, []int, error) {
	r := &frameReader{c: c}
	var h handoverHeader
	if err := r.next(&h); err != nil {
		closeFds(r.fds)
		return nil, nil, fmt.Errorf("handover: %w", err)
	}
	if h.Error != "" {
		closeFds(r.fds)
		return nil, nil, errors.New(h.Error)
	}
	for len(r.fds) < h.Fds {
		var n int
		if err := r.next(&n); err != nil {
			closeFds(r.fds)
			return nil, nil, fmt.Errorf("handover: %d of %d descriptors came: %w", len(r.fds), h.Fds, err)
		}
	}
	if len(r.fds) != h.Fds {
		closeFds(r.fds)
		return nil, nil, fmt.Errorf("handover: %d descriptors came, %d were sent", len(r.fds), h.Fds)
	}
	return h.State, r.fds, nil
}

// ErrUnconfirmed is a Taken whose verdict went out but whose
// confirmation did not come back: the handing process may have taken the
// verdict (and stopped for good) or not (and serve on).
var ErrUnconfirmed = errors.New("the handing process did not confirm")

// Taken tells the other process the mount is taken, and returns once it
// has closed its control socket and everything this process must open
// again (listeners, leases): from then on this process serves the mount.
// An error that is not ErrUnconfirmed means the verdict did not go out:
// the other process serves on.
func (t *Taking) Taken() error {
	defer t.c.Close()
	if err := writeFrame(t.c, verdict{Taken: true}, nil); err != nil {
		return err
	}
	var v verdict
	if err := readFrame(t.c, &v, nil); err != nil {
		return fmt.Errorf("%w: %v", ErrUnconfirmed, err)
	}
	return nil
}

// Abort tells the other process the mount is not taken, and why: it
// serves again. The descriptors are this process's to close.
func (t *Taking) Abort(reason string) {
	writeFrame(t.c, verdict{Error: reason}, nil)
	t.c.Close()
}
