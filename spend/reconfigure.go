package spend

// Reconfigure changes the policy of a running Limiter to cfg's: prices and
// the unknown-model rule, the ladder, the ceiling and its stages, the rate
// window, the default output size, the tenants' budgets and the alert
// thresholds. Nothing of what it has booked changes: the books are the
// ledger's and stay, and so do the counters, the observed output sizes,
// the alert states of thresholds that remain, and the reservations
// outstanding, each of which settles at the price it was admitted at.
//
// A tenant whose budget is removed keeps its books and counters and has
// no budget from now on. The Alerter's webhook, interval and timeout are
// not changed (an Alerter reads them when it starts): the running values
// are kept whatever cfg says. An invalid cfg is refused with an error
// naming the field, and nothing changes.
func (l *Limiter) Reconfigure(cfg Config) error {
	c, err := cfg.compile()
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.cfg()
	c.webhook, c.interval, c.timeout = old.webhook, old.interval, old.timeout
	l.conf.Store(c)
	g := &l.mu.global
	g.alertPerHour, g.limitHour = c.alertGlobal, c.ceiling
	if g.alertPerHour <= 0 {
		g.alert = alertState{}
	}
	for _, st := range l.mu.tenants.list {
		if _, ok := c.tenants[st.name]; !ok && st.budget != nil {
			st.budget = nil
			st.limitHour, st.limitDay, st.alertPerHour = 0, 0, 0
			st.alert = alertState{}
		}
	}
	l.addBudgetsLocked(c)
	l.mu.fair.valid = false // the first stage's room may have moved
	return nil
}

// addBudgetsLocked gives every tenant of c its budget and every priced
// model its books, keeping what they have booked. l.mu is held.
func (l *Limiter) addBudgetsLocked(c *compiled) {
	for _, name := range sortedKeys(c.tenants) {
		b := c.tenants[name]
		st := l.mu.tenants.add(name)
		st.budget = &b
		st.limitHour, st.limitDay, st.alertPerHour = b.PerHour, b.PerDay, b.AlertPerHour
	}
	for _, name := range sortedKeys(c.prices) {
		l.mu.models.add(name)
	}
}
