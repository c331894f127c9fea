package config

// EffectiveMaxQueue is the waiting room's bound the config gives the gate,
// and whether it is derived (admission.max_queue absent; see
// DefaultMaxQueue) rather than set. For `sluice check-config` and the
// startup log.
func (c Config) EffectiveMaxQueue() (n int, derived bool) {
	derived = c.Admission.MaxQueue == nil
	return *c.WithDefaults().Admission.MaxQueue, derived
}
