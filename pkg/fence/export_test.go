package fence

// StaleTokenError lets the tests read the tokens of a refused write.
type StaleTokenError = staleTokenError
