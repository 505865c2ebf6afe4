// expect: "Order a basket"
// Read a page as a person reads it: the text, no scripts, no hidden elements.
const page = await tools.browser.browser_execute({tab: "examples", operations: [
  {type: "navigate", params: {url: "__PAGES__/browser_reading.html"}},
  {type: "getText"},
]});
const step = page.results[1];
step.operation === "getText" ? step.result.text.slice(0, 200) : "no text"
