"""What pipeline/, model/ and launch/ share: the user-error base, the command-line builder and
atomic file writes. Imports nothing of ours, so every room may import it."""
