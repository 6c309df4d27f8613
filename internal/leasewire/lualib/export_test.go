package lualib

// ContentVersion is the hash of the registered scripts' library text with an empty version.
func ContentVersion() string {
	scripts, _ := all()
	return contentVersion(scripts)
}

// ForgetMissing makes every client's Auto try FCALL again at its next call.
func ForgetMissing(st *State) { st.preferFunctions() }

// Registered returns the registered script called name, nil if none.
func Registered(name string) *Script {
	regMu.Lock()
	defer regMu.Unlock()
	return registered[name]
}
