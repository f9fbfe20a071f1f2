package slo

import "github.com/gpreempt/gpreempt/internal/slo/objective"

// The objectives the controller judges by, read by package objective.
type (
	Objective  = objective.Objective
	Objectives = objective.Objectives
)

var ErrInvalid, ParseObjective, ParseObjectives = objective.ErrInvalid, objective.Parse, objective.ParseList

const RefStandalone, RefShortest = objective.Standalone, objective.Shortest
