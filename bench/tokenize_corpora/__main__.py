from lookupkit.bench.tokenize_corpora.run import main

main()
