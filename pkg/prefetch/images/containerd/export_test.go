package containerd

// LowerDirs lets the external tests read a view's layer directories as the backend does.
var LowerDirs = lowerDirs
