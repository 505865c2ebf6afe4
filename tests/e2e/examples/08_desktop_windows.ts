// expect: "windows"
// List the desktop's windows, and the typed declaration of a tool when in doubt.
const listed = await tools.browser.desktop_execute({operations: [{type: "getWindows"}, {type: "getActiveWindow"}]});
const declaration = await mcp.describe("browser", "desktop_execute");
JSON.stringify({windows: listed.results[0].operation === "getWindows", declared: declaration.includes("getWindows")})
