package sdnotify

// StatusLine is statusLine, for the fuzz test.
var StatusLine = statusLine
