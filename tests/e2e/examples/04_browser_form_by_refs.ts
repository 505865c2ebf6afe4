// expect: "customer=Ada"
// Fill a form through the refs find() gives, then submit it: no selectors, no pixels.
const found = await tools.browser.browser_execute({tab: "examples", operations: [
  {type: "navigate", params: {url: "__PAGES__/browser_reading.html"}},
  {type: "find", params: {query: "Full name"}},
]});
const step = found.results[1];
const ref = step.operation === "find" ? (step.result.elements.match(/\[(ref_\d+)\]/) || [])[1] : undefined;
if (!ref) throw new Error("no field found");
const sent = await tools.browser.browser_execute({tab: "examples", operations: [
  {type: "formInput", params: {ref, value: "Ada"}},
  {type: "click", params: {selector: "text=Place order"}},
  {type: "wait", params: {ms: 300}},
  {type: "url"},
]});
sent.url
