package rule_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store/rule"
)

func TestMergeLaterDependencyWins(t *testing.T) {
	got, err := rule.Merge(json.RawMessage(`{"a":1,"b":1}`), json.RawMessage(`{"b":2,"c":2}`), nil,
		json.RawMessage(`null`), json.RawMessage(`[1]`), json.RawMessage(`{"c":3}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1,"b":2,"c":3}`, string(got))

	got, err = rule.Merge(json.RawMessage(`[1]`), json.RawMessage(`{"x":1}`))
	require.Error(t, err, "an input that is not an object")
	require.JSONEq(t, `{"x":1}`, string(got), "the outputs alone")
	got, err = rule.Merge(json.RawMessage(`null`), json.RawMessage(`{"x":1}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"x":1}`, string(got))
}

func TestEval(t *testing.T) {
	deps := func(statuses ...string) []rule.Dep {
		var out []rule.Dep
		for i, s := range statuses {
			out = append(out, rule.Dep{Idx: i, Name: string(rune('a' + i)), Status: s, Output: json.RawMessage(`{"n":` + string(rune('1'+i)) + `}`)})
		}
		return out
	}
	for _, tc := range []struct {
		rule string
		deps []rule.Dep
		want bool
	}{
		{``, deps("completed", "completed"), true},
		{``, deps("completed", "skipped"), false},
		{`{"shorthand":"all_success"}`, deps("completed", "failed"), false},
		{`{"shorthand":"all_done"}`, deps("failed", "cancelled"), true},
		{`{"shorthand":"one_failed"}`, deps("completed", "failed"), true},
		{`{"shorthand":"one_failed"}`, deps("completed", "skipped"), false},
		{`{"shorthand":"none_failed"}`, deps("completed", "skipped"), true},
		{`{"shorthand":"none_failed"}`, deps("completed", "cancelled"), false},
		{`{"mode":"all","conditions":[{"kind":"succeeded","task":"a"},{"kind":"skipped","task":"b"}]}`, deps("completed", "skipped"), true},
		{`{"mode":"any","conditions":[{"kind":"failed","task":"a"},{"kind":"failed","task":"b"}]}`, deps("completed", "completed"), false},
		{`{"mode":"none","conditions":[{"kind":"failed","task":"a"}]}`, deps("completed"), true},
		// The context: run input {"n":0,"s":"abc"}, then a's {"n":1}, b's {"n":2}.
		{`{"mode":"all","conditions":[{"kind":"context","key":"n","op":"eq","value":2}]}`, deps("completed", "completed"), true},
		{`{"mode":"all","conditions":[{"kind":"context","key":"n","op":"gt","value":1.5},{"kind":"context","key":"s","op":"contains","value":"b"}]}`, deps("completed", "completed"), true},
		{`{"mode":"all","conditions":[{"kind":"context","key":"x.y","op":"exists"}]}`, deps("completed"), false},
		{`{"mode":"all","conditions":[{"kind":"run_failed","run":7}]}`, []rule.Dep{{Run: 7, Status: "cancelled"}}, true},
		{`{"mode":"all","conditions":[{"kind":"run_succeeded","run":7}]}`, []rule.Dep{{Run: 7, Status: "failed"}}, false},
	} {
		got, err := rule.Eval(json.RawMessage(tc.rule), tc.deps, json.RawMessage(`{"n":0,"s":"abc"}`))
		require.NoError(t, err, tc.rule)
		require.Equal(t, tc.want, got, "%s over %v", tc.rule, tc.deps)
	}
	_, err := rule.Eval(json.RawMessage(`{"shorthand":"nope"}`), nil, nil)
	require.Error(t, err)
}

func TestValidate(t *testing.T) {
	known := func(name string) bool { return name == "a" || name == "z" }
	for r, want := range map[string]string{
		`{}`:                          "",
		`{"shorthand":"all_success"}`: "",
		`{"shorthand":"nope"}`:        `unknown shorthand "nope"`,
		`{"mode":"all"}`:              `mode "all" needs conditions`,
		`{"mode":"all","conditions":[{"kind":"succeeded","task":"z"}]}`:        `succeeded("z"): not a dependency`,
		`{"mode":"all","conditions":[{"kind":"succeeded","task":"q"}]}`:        `succeeded("q"): unknown task`,
		`{"mode":"all","conditions":[{"kind":"context","key":"k","op":"is"}]}`: `context op "is" must be one of`,
		`{"mode":"all","conditions":[{"kind":"run_failed","run":1}]}`:          "run conditions belong",
	} {
		var x rule.Rule
		require.NoError(t, json.Unmarshal([]byte(r), &x))
		raw, err := x.ForTask([]string{"a"}, known)
		if want == "" {
			require.NoError(t, err, r)
			require.Nil(t, raw, "the default is stored as nil")
			continue
		}
		require.ErrorContains(t, err, want, r)
	}
	raw, err := rule.Rule{Shorthand: "all_done"}.ForTask(nil, known)
	require.NoError(t, err)
	require.JSONEq(t, `{"shorthand":"all_done"}`, string(raw))
	raw, err = rule.Rule{Mode: "any", Conditions: []rule.Condition{{Kind: "run_failed", Run: 3}}}.ForAfter([]int64{3})
	require.NoError(t, err)
	require.JSONEq(t, `{"mode":"any","conditions":[{"kind":"run_failed","run":3}]}`, string(raw))
	_, err = rule.Rule{}.ForAfter([]int64{3})
	require.ErrorContains(t, err, "give a shorthand")
	_, err = rule.Rule{Mode: "all", Conditions: []rule.Condition{{Kind: "run_failed", Run: 4}}}.ForAfter([]int64{3})
	require.ErrorContains(t, err, "not a run of WithAfter")
}
