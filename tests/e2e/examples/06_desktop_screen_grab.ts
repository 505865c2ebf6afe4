// expect: "width"
// Read the screen's size before aiming, and grab it.
const screen = await tools.browser.desktop_execute({operations: [
  {type: "screen.width"}, {type: "screen.height"}, {type: "screen.grab"},
]});
const grab = screen.results[2];
JSON.stringify({width: screen.screen.width, height: screen.screen.height, grabbed: grab.operation})
