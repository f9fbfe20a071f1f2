package slo

import "github.com/gpreempt/gpreempt/internal/slo/objective"

// The tests name objectives as the package did before they moved.
type (
	Objective  = objective.Objective
	Objectives = objective.Objectives
)

var ErrInvalid, ParseObjective, ParseObjectives = objective.ErrInvalid, objective.Parse, objective.ParseList

const RefStandalone, RefShortest = objective.Standalone, objective.Shortest
