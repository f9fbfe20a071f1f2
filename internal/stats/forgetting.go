package stats

import "math"

// Forgetting is an exponentially forgetting estimate of one quantity: the
// weighted sums of its observations, every weight multiplied by Decay's
// factor. W is how many observations it effectively rests on.
type Forgetting struct{ W, Sx, Sxx float64 }

// Add folds in one observation (NaN and infinities are ignored).
func (e *Forgetting) Add(x float64) {
	if !math.IsNaN(x) && !math.IsInf(x, 0) {
		e.W, e.Sx, e.Sxx = e.W+1, e.Sx+x, e.Sxx+x*x
	}
}

// Decay multiplies every weight by f.
func (e *Forgetting) Decay(f float64) { e.W, e.Sx, e.Sxx = e.W*f, e.Sx*f, e.Sxx*f }

// Scale multiplies every observation by f.
func (e *Forgetting) Scale(f float64) { e.Sx, e.Sxx = e.Sx*f, e.Sxx*f*f }

// Mean is the weighted mean (NaN with no weight).
func (e *Forgetting) Mean() float64 { return e.Sx / e.W }

// SD is one observation's standard deviation, pooled with a prior
// relative scatter weighted as prior observations: a few observations
// that happen to agree do not make a noisy quantity look steady.
func (e *Forgetting) SD(scatter, prior float64) float64 {
	m, p := e.Mean(), scatter*e.Mean()
	return math.Sqrt((max(0, e.Sxx-e.Sx*m) + prior*p*p) / (e.W + prior))
}

// Bounds are the mean's confidence bounds, z standard errors either side.
func (e *Forgetting) Bounds(z, scatter, prior float64) (lo, hi float64) {
	se := e.SD(scatter, prior) / math.Sqrt(e.W)
	return e.Mean() - z*se, e.Mean() + z*se
}

// MostDeviant is z, the standard normal deviate farthest from 0 of n
// independent ones, as one deviate as likely (Šidák): of 8 the most
// deviant is 2 deviations out half the time, and read as one would look
// like a shift. Infinite where its chance underflows.
func MostDeviant(z float64, n int) float64 {
	if n <= 1 {
		return z
	}
	p := math.Erfc(math.Abs(z) / math.Sqrt2)       // two-sided, one
	pn := -math.Expm1(float64(n) * math.Log1p(-p)) // of n
	return math.Copysign(math.Sqrt2*math.Erfcinv(pn), z)
}

// Scatter learns one measurement's relative scatter from two sides: each
// measurement's own standard error from its samples (Own, of its square),
// and how far each fell from the mean of those before it of the same
// quantity (Off, relative, scaled to one measurement's own).
type Scatter struct{ Own, Off Forgetting }

// Add folds in a measurement x of relative standard error se (NaN: not
// known), and how far it fell from before, the estimate of those before it
// of the same quantity, where that rests on a weight of least or more (nil:
// none).
func (s *Scatter) Add(x, se float64, before *Forgetting, least float64) {
	s.Own.Add(se * se)
	if before != nil && before.W >= least && before.W > 0 { // a new one falls off a mean of W by 1+1/W as much as one measurement scatters
		s.Off.Add((x/before.Mean() - 1) * math.Sqrt(before.W/(before.W+1)))
	}
}

// Decay multiplies every weight by f.
func (s *Scatter) Decay(f float64) { s.Own.Decay(f); s.Off.Decay(f) }

// Of is the relative scatter of a measurement whose own squared errors
// own holds (nil or empty: every measurement's, else prior), pooled, as
// weight measurements, with how far measurements fell apart.
func (s *Scatter) Of(own *Forgetting, prior, weight float64) float64 {
	if s == nil { // none learnt yet
		s = &Scatter{}
	}
	v := prior * prior
	switch {
	case own != nil && own.W > 0:
		v = own.Mean()
	case s.Own.W > 0:
		v = s.Own.Mean()
	}
	return math.Sqrt((s.Off.Sxx + weight*v) / (s.Off.W + weight))
}
