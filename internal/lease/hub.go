package lease

import "sync"

// hub wakes the watchers of keys in this process; every backend delivers its wake-ups
// through one.
type hub struct {
	mu sync.Mutex // guards keys; a leaf
	// keys holds the channel of each watched key and how many watchers share it; the channel is
	// closed and the entry removed when the key changes.
	keys map[string]*watchers
}

type watchers struct {
	ch chan struct{}
	n  int
}

func (h *hub) watch(key string) (<-chan struct{}, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.keys == nil {
		h.keys = map[string]*watchers{}
	}
	w, ok := h.keys[key]
	if !ok {
		w = &watchers{ch: make(chan struct{})}
		h.keys[key] = w
	}
	w.n++
	ch := w.ch
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if w, ok := h.keys[key]; ok && w.ch == ch {
				if w.n--; w.n <= 0 {
					delete(h.keys, key)
				}
			}
		})
	}
}

func (h *hub) notify(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w, ok := h.keys[key]; ok {
		close(w.ch)
		delete(h.keys, key)
	}
}

// watched counts keys with watchers, for tests.
func (h *hub) watched() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.keys)
}
