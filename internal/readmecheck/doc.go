// Package readmecheck holds no code: its test keeps the repository's
// Markdown honest about Go. Every ```go block of every README.md (and of
// every Markdown file under a docs directory) must appear, whitespace
// aside, as a run of lines of some .go file of the repository — an
// Example function or an example program — so that the snippets a user
// copies are compiled and run by the tests. Text that is not Go goes in
// a ```text or ```sh block.
package readmecheck
