package stack

// pageTable maps a file's page indexes to its cached pages: chunks of
// consecutive indexes in a map, the last chunk used remembered, so that a
// sequential reader's lookups are array accesses.
type pageTable struct {
	chunks map[int64]*pageChunk
	key    int64 // of last
	last   *pageChunk
	n      int
}

const chunkShift = 9

type pageChunk struct {
	p [1 << chunkShift]*page
	n int
}

func (t *pageTable) chunk(idx int64, create bool) *pageChunk {
	key := idx >> chunkShift
	if t.last != nil && t.key == key {
		return t.last
	}
	c := t.chunks[key]
	if c == nil {
		if !create {
			return nil
		}
		if t.chunks == nil {
			t.chunks = make(map[int64]*pageChunk)
		}
		c = new(pageChunk)
		t.chunks[key] = c
	}
	t.key, t.last = key, c
	return c
}

func (t *pageTable) get(idx int64) *page {
	if c := t.chunk(idx, false); c != nil {
		return c.p[idx&(1<<chunkShift-1)]
	}
	return nil
}

func (t *pageTable) set(idx int64, p *page) {
	c := t.chunk(idx, true)
	slot := &c.p[idx&(1<<chunkShift-1)]
	if *slot == nil {
		c.n++
		t.n++
	}
	*slot = p
}

func (t *pageTable) del(idx int64) {
	c := t.chunk(idx, false)
	if c == nil {
		return
	}
	slot := &c.p[idx&(1<<chunkShift-1)]
	if *slot == nil {
		return
	}
	*slot = nil
	t.n--
	if c.n--; c.n == 0 {
		delete(t.chunks, idx>>chunkShift)
		if t.last == c {
			t.last = nil
		}
	}
}

func (t *pageTable) len() int { return t.n }

// each calls fn for every page, in no particular order; fn may delete
// the page it is given.
func (t *pageTable) each(fn func(idx int64, p *page)) {
	for key, c := range t.chunks {
		for i, p := range c.p {
			if p != nil {
				fn(key<<chunkShift+int64(i), p)
			}
		}
	}
}
