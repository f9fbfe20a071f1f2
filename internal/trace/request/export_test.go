package request

// DelimiterThreads is how many threads d remembers (inside a synchronize,
// or with a step mark): bounded by the process's threads.
func DelimiterThreads(d *Delimiter) int { return max(len(d.syncing), len(d.steps)) }

// sizesOf is the sizes after busy periods of last launches closed as
// Delimiter.close closes them: what count divides is not added.
func sizesOf(last []int) *sizes {
	var s sizes
	for _, l := range last {
		if s.count(l, 0) == 1 {
			s.add(l, "cuLaunchKernel", 1<<62)
		}
	}
	return &s
}

// SizesProgram is the program sizes works out from requests of last launches (in order), and
// whether they vary.
func SizesProgram(last []int) (launches int, varies bool) {
	s := sizesOf(last)
	return s.m, s.varies
}

// SizesCount is how many requests a busy period of launches holds after
// requests of last launches, each told apart by quiet gaps (in order).
func SizesCount(last []int, launches int) int { return sizesOf(last).count(launches, 0) }
