package listener

import "time"

// Refusing returns the connections beyond l's cap being answered now.
func Refusing(l *Listener) int { return int(l.refusing.Load()) }

// SetRefuseWait sets the time l holds a refused connection (refuseWait);
// call it before serving.
func SetRefuseWait(l *Listener, d time.Duration) { l.refuseWait = d }
