package request

// DelimiterThreads is how many threads d remembers (inside a synchronize,
// or with a step mark): bounded by the process's threads.
func DelimiterThreads(d *Delimiter) int { return max(len(d.syncing), len(d.steps)) }
