// expect: "line 3"
// Start a program, wait for it, then find lines in its log by regular expression.
const started = await tools.exec.exec({bin: "sh", args: ["-c", "for i in 1 2 3 4; do echo line $i; done"], timeout: 30});
let status = "running";
while (status === "running") {
  status = (await tools.exec.stream_logs({id: started.id, offset: 0})).status;
  if (status === "running") await new Promise((resolve) => setTimeout(resolve, 100));
}
const found = await tools.exec.search_logs({id: started.id, pattern: "line [3]"});
found.matches.map((m) => m.line).join(", ")
