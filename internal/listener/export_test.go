package listener

// Refusing returns the connections beyond l's cap being answered now.
func Refusing(l *Listener) int { return int(l.refusing.Load()) }
