package norn

// Validate checks a log append the same way on every store: data is
// required and must be JSON within MaxLogBytes, and seq within the range
// the stores hold. Errors name "data" or "seq".
func (a LogAppend) Validate() error {
	if len(a.Data) == 0 {
		return Invalid("data", "log data is required")
	}
	if err := ValidateJSON("data", a.Data, MaxLogBytes); err != nil {
		return err
	}
	return ValidateSeq("seq", a.Seq)
}

// CheckSeq decides whether an append may take the sequence number next of
// task id: any when it names none (Seq 0), otherwise only that one. A
// retried append whose first attempt took effect is decided before this,
// by IsLogRepeat.
func (a LogAppend) CheckSeq(id string, next uint64) error {
	if a.Seq == 0 || a.Seq == next {
		return nil
	}
	e := Errorf(CodeConflict, "task %q: next log sequence is %d, not %d", id, next, a.Seq)
	e.Field = "seq"
	return e
}
