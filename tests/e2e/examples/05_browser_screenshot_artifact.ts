// expect: "image/png"
// Take a screenshot; attach it with artifact() so the model sees that one image.
const shot = await tools.browser.browser_execute({tab: "examples", operations: [
  {type: "setContent", params: {html: "<h1>Hello from codedesk</h1>"}},
  {type: "screenshot"},
]});
const step = shot.results[1];
if (step.operation !== "screenshot" || !shot.images) throw new Error("no screenshot");
const image = shot.images[step.result.image_index];
artifact(image);
image.mimeType
