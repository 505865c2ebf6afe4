// expect: "\"width\":40"
// Make an image with a program, then inspect and resize it with documents.
const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg==";
const made = await tools.exec.run({bin: "python3", timeout: 30, args: ["-c",
  "import base64,sys; open(sys.argv[1],'wb').write(base64.b64decode(sys.argv[2]))", "example-dot.png", png]});
if (made.status !== "completed:0") throw new Error(made.logs);
const resized = await tools.documents.image_resize({path: "~/example-dot.png", width: 40, height: 20,
                                                    output_path: "~/example-dot-40.png"});
const info = await tools.documents.image_get_info({path: resized.output_path});
JSON.stringify({width: info.width, height: info.height})
