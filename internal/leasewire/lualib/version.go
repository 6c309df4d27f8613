package lualib

// Version is the hash of the function library's text (its first 8 hex digits of SHA-256, with
// the version left out of the names): it names the library, elector_<Version>, and its
// functions, elector_<Version>_<script>. It changes whenever a script changes; TestVersion
// fails until it is updated here, and says to what.
const Version = "c2e0f3ac"
