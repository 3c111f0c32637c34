// Package proccpu reads the CPU time this process has used. Differences of
// it measure what a piece of work cost in CPU, which, unlike wall time,
// hardly depends on what else the machine is running: the benchmarks
// report it beside their rates.
package proccpu
