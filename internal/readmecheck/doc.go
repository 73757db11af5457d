// Package readmecheck holds no code: its test requires every ```go block of
// every README.md (and Markdown file under docs) to appear, whitespace aside,
// in some .go file of the repository, so the snippets users copy are compiled.
// Text that is not Go goes in a ```text or ```sh block.
package readmecheck
