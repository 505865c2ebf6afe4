// expect: "Quarterly notes"
// Write a text file, convert it to PDF with LibreOffice, and read the PDF's text back.
const written = await tools.exec.run({bin: "sh", timeout: 30,
  args: ["-c", "printf 'Quarterly notes\\nAll good.\\n' > example-notes.txt"]});
if (written.status !== "completed:0") throw new Error(written.logs);
const pdf = await tools.documents.convert_document({path: "~/example-notes.txt", to: "pdf"});
const read = await tools.documents.read_pdf({path: pdf.output_files[0]});
read.pages[0].text
