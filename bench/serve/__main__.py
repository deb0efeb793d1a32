from lookupkit.bench.serve.run import main

main()
