"""Does lookupkit's policy make drafting pay? (issue 9) llama.cpp's rule and the policy at each verify cost,
side by side on the same static caches of WikiText-103 and on code, replayed, with the caches' build times
and issue 9's targets (run: `python -m lookupkit.bench.policy_pays`, results bench/results/policy-<date>.json)
and the tables RESULTS.md quotes (report); `reach` measures how far drafts hold on a model's generations (the
evidence for the chain's length rule, issue 31). Named policy_pays, not policy: it studies lookupkit's policy, it is not
the policy."""
