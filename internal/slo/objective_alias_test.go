package slo

import "github.com/gpreempt/gpreempt/internal/slo/objective"

// The tests name objectives as the package did before they moved.
type Objective = objective.Objective

var ErrInvalid = objective.ErrInvalid

const RefStandalone, RefShortest = objective.Standalone, objective.Shortest
