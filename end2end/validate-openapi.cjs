// Validates an OpenAPI document (JSON file given as the only argument) against the OpenAPI
// specification with swagger-parser, and prints the error that makes it invalid.
// Used by the server's integration tests: `node end2end/validate-openapi.cjs doc.json`.
const SwaggerParser = require('@apidevtools/swagger-parser');

const file = process.argv[2];
if (!file) {
  console.error('usage: node validate-openapi.cjs <openapi.json>');
  process.exit(2);
}
SwaggerParser.validate(file)
  .then((api) => {
    const operations = Object.values(api.paths).flatMap((item) => Object.keys(item)).length;
    console.log(`valid: ${api.info.title} ${api.info.version}, OpenAPI ${api.openapi}, ${operations} operations`);
  })
  .catch((err) => {
    console.error(`invalid: ${err.message}`);
    process.exit(1);
  });
