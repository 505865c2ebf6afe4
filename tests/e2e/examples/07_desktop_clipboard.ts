// expect: "Grüße 東京"
// Put any text on the desktop's clipboard and read it back (paste it with LeftControl+V).
const clip = await tools.browser.desktop_execute({operations: [
  {type: "clipboard.setContent", params: {text: "Grüße 東京"}},
  {type: "clipboard.getContent"},
]});
const step = clip.results[1];
step.operation === "clipboard.getContent" ? step.result : "?"
