// expect: "completed:0"
// Run a program and wait for it: the helper does the stream_logs polling loop.
const r = await tools.exec.run({bin: "uname", args: ["-s"], timeout: 30});
console.log(r.logs.trim());
r.status
