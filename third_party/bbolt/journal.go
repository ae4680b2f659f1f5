package bbolt

// Journal makes a commit durable in one synced write (Hermes's patch, see JOURNAL.md and
// Options.Journal).
type Journal interface {
	// Log records the writes of one commit, in order, the meta page last, and returns once they
	// are on stable storage. It is called with the DB's writer lock held, after every earlier
	// commit has been written into the file. The slices are valid only during the call.
	Log(writes []JournalWrite) error
}

// A Journal that is also an io.Closer is closed by DB.Close, after the file.

// JournalWrite is one write of a commit: Data goes at byte Offset of the file.
type JournalWrite struct {
	Offset int64
	Data   []byte
}
